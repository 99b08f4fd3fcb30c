"""Checkpoint verification: index and headers, pinned facts, the DSpark heads, content hashes.

`verify.verify_checkpoint` returns one frozen result with every problem; `preflight` turns it into
launch findings. Nothing here writes into a checkpoint.
"""
