"""The synthetic rig: a mechanism's model with hidden mismatches, faults and noise, streamed as the
twin's sensor messages (:mod:`.synthetic`), its faults (:mod:`.faults`), message-level faults
(:mod:`.messages`), rig files (:mod:`.file`), the MQTT publisher (:mod:`.client`), recordings
(:mod:`.recording`) and scenarios with known truth run through the twin's core (:mod:`.scenarios`).

The rig speaks the twin's contract (:mod:`mbsd_twin.twin.protocol`): it imports the twin; the twin
imports the rig only where its command line wires one in (docs/architecture.md)."""
