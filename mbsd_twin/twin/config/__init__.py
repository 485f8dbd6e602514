"""The service's configuration (docs/service-config.md): its sections as typed frozen dataclasses
(:mod:`.sections`), read from a TOML file plus environment overrides (:mod:`.file`) and checked
whole, every problem named (:mod:`.checks`)."""
