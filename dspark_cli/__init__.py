"""dspark: DSpark speculative decoding on vLLM, from checkpoint to verified, benchmarked serving."""

__version__ = "0.1.0"
