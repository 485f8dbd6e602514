"""Plots and animations of results (a face: the engine never imports it).
"""
