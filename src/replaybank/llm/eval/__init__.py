"""Evaluating behaviour by generation: batched greedy decoding, deterministic checkers, the
general-capability suite and generated-answer domain accuracy."""
