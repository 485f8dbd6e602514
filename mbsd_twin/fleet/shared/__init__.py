"""Several assets' twins in one process (``[fleet] twins_per_process`` > 1, docs/fleet.md "Many
twins in one process"): :mod:`.host` runs them inside the process — each its own
:class:`~..member.Member` with its own MQTT connection, lease and checkpoints, restarted alone when
it fails — and :mod:`.pool` is the local backend's side: which process holds which asset, adding
and removing assets in a running process, restarting a dead process with all its assets;
:mod:`.actors` is the same on Ray (a group actor, sent its assets again after Ray restarted it)."""
