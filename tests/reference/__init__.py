"""Independent closed-form references for the engine tests.

The closed forms (``planar``, ``slider_crank``, ``four_bar``, ``scotch_yoke``) use numpy only and
never import ``mbsd_twin``: every number comes from hand derivations written out in their
comments, so the tests compare the engine against something it cannot have influenced.
``models`` builds the matching engine models with ``mt.MechanismBuilder``.
"""
