"""Continual LoRA fine-tuning of an LLM with a rehearsal buffer (``replaybank run``).

Heavy dependencies (torch, transformers, peft) are imported inside the functions that need them.
"""
