"""Digital twin over MQTT: the contract (docs/mqtt-contract.md), a broker-free deterministic core,
the service around it, its configuration, recording and replay. Its sub-systems are packages of
their own: the synthetic rig (:mod:`mbsd_twin.rig`), storage (:mod:`mbsd_twin.storage`: history and
checkpoints) and the fleet (:mod:`mbsd_twin.fleet`); docs/architecture.md.

Import the pieces from their modules (``mbsd_twin.twin.service`` needs paho-mqtt and
prometheus-client, the ``twin`` extra); this package import is light.
"""

from .config.file import load_config
from .config.sections import ConfigError, CoreConfig, TwinConfig

__all__ = ["ConfigError", "CoreConfig", "TwinConfig", "load_config"]
