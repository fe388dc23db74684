"""Replay in reinforcement learning: a reference DQN (``dqn``, ``compare``), trajectory replay for
offline RL (``offline``), and rollout replay for RL post-training of language models
(``rollouts``; GRPO with LoRA on a chat LM in ``grpo_trainer`` with ``grpo_lm``, ``grpo_task`` and
``sampling``; the toy ``grpo_demo``).

Every module imports only numpy at import time; torch, gymnasium and matplotlib are imported
inside the functions that train or plot.
"""

from __future__ import annotations

__all__: list[str] = []
