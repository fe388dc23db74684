"""Shipped data (the probe, the self-synthesis prompt pool) and self-synthesized rehearsal."""
