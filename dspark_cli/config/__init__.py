"""Config schemas (dataclasses registered in Hydra's ConfigStore) and config-file lookup."""
