"""The fleet: one twin per ``[[asset]]`` of a fleet file, kept running (:mod:`.supervisor`, with
:mod:`.ray_backend`), each a member process (:mod:`.member`) that checkpoints its twin under a lease
(:mod:`.fence`, :mod:`.trust`), with the fleet's status topic (:mod:`.status`), the fleet file
(:mod:`.config`), the broker's ACL for it (:mod:`.acl`), a synthetic feed of rigs (:mod:`.feed`)
and the ``mbsd-twin fleet`` commands (:mod:`.cli`).

The fleet sits on top of the twin service, the rig and storage: it imports them; none of them
imports the fleet (docs/architecture.md)."""
