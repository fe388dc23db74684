"""The small torch models of the harness: one MLP family (classifier) and a VAE generator.

Parameters are initialised from a passed ``torch.Generator`` (the layers are built with
``skip_init`` so construction does not touch torch's global RNG), with the same distributions as
``torch.nn.Linear``'s default initialisation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["MLP", "VAE", "init_linear_"]


def init_linear_(layer: nn.Linear, generator: torch.Generator) -> None:
    """torch.nn.Linear's default init (Kaiming-uniform weights, U(+-1/sqrt(fan_in)) bias), seeded."""
    with torch.no_grad():
        nn.init.kaiming_uniform_(layer.weight, a=math.sqrt(5), generator=generator)
        if layer.bias is not None:
            bound = 1.0 / math.sqrt(layer.in_features)
            nn.init.uniform_(layer.bias, -bound, bound, generator=generator)


def _stack(sizes: Sequence[int], generator: torch.Generator, *, last_activation: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        linear = torch.nn.utils.skip_init(nn.Linear, fan_in, fan_out)
        init_linear_(linear, generator)
        layers.append(linear)
        if i < len(sizes) - 2 or last_activation:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class MLP(nn.Module):
    """ReLU MLP ``input_dim -> hidden... -> n_classes`` returning logits.

    Example:
        >>> m = MLP(64, 10, hidden=(100, 100), generator=torch.Generator().manual_seed(0))
        >>> m(torch.zeros(3, 64)).shape, sum(p.numel() for p in m.parameters())
        (torch.Size([3, 10]), 17610)
    """

    def __init__(
        self, input_dim: int, n_classes: int, *, hidden: Sequence[int], generator: torch.Generator
    ) -> None:
        super().__init__()
        self.net = _stack([input_dim, *hidden, n_classes], generator, last_activation=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class VAE(nn.Module):
    """A small MLP variational autoencoder over flat real-valued inputs (Gaussian decoder).

    Used by generative replay (Shin et al. 2017) as the generator of past inputs.
    """

    def __init__(
        self, input_dim: int, *, hidden: int = 100, latent: int = 10, generator: torch.Generator
    ) -> None:
        super().__init__()
        self.latent = latent
        self.encoder = _stack([input_dim, hidden, hidden], generator, last_activation=True)
        self.to_stats = _stack([hidden, 2 * latent], generator, last_activation=False)
        self.decoder = _stack([latent, hidden, hidden, input_dim], generator, last_activation=False)

    def loss(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Negative ELBO per example (squared error reconstruction + KL to N(0, I)), averaged."""
        mu, log_var = self.to_stats(self.encoder(x)).chunk(2, dim=1)
        eps = torch.randn(mu.shape, generator=generator)
        z = mu + eps * torch.exp(0.5 * log_var)
        recon = ((self.decoder(z) - x) ** 2).sum(dim=1)
        kl = -0.5 * (1 + log_var - mu**2 - log_var.exp()).sum(dim=1)
        return (recon + kl).mean()

    @torch.no_grad()
    def sample(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """Draw ``n`` inputs by decoding latent codes from N(0, I)."""
        return self.decoder(torch.randn((n, self.latent), generator=generator))
