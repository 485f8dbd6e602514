"""Independent closed-form references for the engine tests.

Nothing in this package imports ``mbsd_twin``: every number here comes from hand derivations
(written out in the comments) using numpy only, so the tests compare the engine against something
it cannot have influenced.
"""
