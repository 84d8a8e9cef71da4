"""Optimizers and the learning-rate schedule of the original BERT, as plain ``torch.optim`` objects.

Everything here works in any PyTorch loop, under Accelerate, and in ``transformers.Trainer``
(``Trainer(..., optimizers=(optimizer, scheduler))``).

* :func:`param_groups`: weight decay on every weight except LayerNorm parameters and biases (Google's
  ``exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"]``).
* :class:`AdamGoogle`: Google's ``AdamWeightDecayOptimizer`` (``optimization.py``): Adam **without bias
  correction**, decoupled weight decay added to the update before the learning rate is applied.
* :class:`Lamb`: LAMB (You et al., 2019, "Large Batch Optimization for Deep Learning"), as NVIDIA pretrains
  BERT with it: Adam moments with bias correction, decoupled weight decay, and a per-tensor trust ratio
  ``||w|| / ||update||``. Like NVIDIA's ``FusedLAMB`` (``use_nvlamb=False``), the trust ratio is applied only to
  parameter groups with weight decay; ``adapt_all=True`` applies it everywhere.
* :func:`linear_warmup_decay`: linear warmup from 0, then linear decay to 0 at ``total_steps``. Google decays
  ``lr * (1 - step / total)`` and overrides it with the warmup ramp, which jumps down at the end of warmup; this
  schedule decays over the steps after warmup (as transformers' ``get_linear_schedule_with_warmup``), so it is
  continuous. Gradient clipping (global norm 1.0) belongs to the training loop.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from .optim_names import OPTIMIZERS

__all__ = [
    "OPTIMIZERS",
    "NO_DECAY_KEYWORDS",
    "AdamGoogle",
    "Lamb",
    "LinearWarmupDecay",
    "create_optimizer",
    "linear_warmup_decay",
    "param_groups",
    "warmup_steps_for",
]

#: Substrings of parameter names that get no weight decay (Google's list).
NO_DECAY_KEYWORDS: tuple[str, ...] = ("LayerNorm", "layer_norm", "bias")


def param_groups(
    model: nn.Module, weight_decay: float, no_decay: Iterable[str] = NO_DECAY_KEYWORDS
) -> list[dict]:
    """Two parameter groups: ``weight_decay`` for weights, 0 for LayerNorm parameters and biases.

    Tied parameters (the MLM decoder and the word embeddings) appear once. Frozen parameters are left out.
    """
    no_decay = tuple(no_decay)
    decay, plain = [], []
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        (plain if any(key in name for key in no_decay) else decay).append(parameter)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": plain, "weight_decay": 0.0},
    ]


def _check_hyperparameters(lr: float, betas: tuple[float, float], eps: float, weight_decay: float) -> None:
    if not lr >= 0.0:
        raise ValueError(f"learning rate must be >= 0, got {lr}")
    if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
        raise ValueError(f"betas must be two values in [0, 1), got {betas}")
    if not eps > 0.0:
        raise ValueError(f"eps must be > 0, got {eps}")
    if not weight_decay >= 0.0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")


class _AdamFamily(torch.optim.Optimizer):
    """The loop shared by the Adam-style optimizers below; each defines ``_update`` for one parameter."""

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                if param.grad.is_sparse:
                    raise RuntimeError(f"{type(self).__name__} does not support sparse gradients")
                self._update(param, group, self.state[param])
        return loss

    def _update(self, param: torch.Tensor, group: dict, state: dict) -> None:
        raise NotImplementedError


def _adam_direction(param: torch.Tensor, group: dict, state: dict, *, bias_correction: bool) -> torch.Tensor:
    """Update the moments with ``param.grad`` and return m / (sqrt(v) + eps) + weight_decay * param."""
    beta1, beta2 = group["betas"]
    if not state:
        state["step"] = 0
        state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
    state["step"] += 1
    exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
    exp_avg.mul_(beta1).add_(param.grad, alpha=1.0 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(param.grad, param.grad, value=1.0 - beta2)
    m, v = exp_avg, exp_avg_sq
    if bias_correction:
        m = m / (1.0 - beta1 ** state["step"])
        v = v / (1.0 - beta2 ** state["step"])
    update = m / (v.sqrt() + group["eps"])
    if group["weight_decay"] != 0.0:
        update.add_(param, alpha=group["weight_decay"])
    return update


class AdamGoogle(_AdamFamily):
    """Google's BERT optimizer: Adam without bias correction, with decoupled weight decay.

    Per step, for each parameter ``w`` with gradient ``g``::

        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        w = w - lr * (m / (sqrt(v) + eps) + weight_decay * w)

    The defaults are Google's (beta (0.9, 0.999), eps 1e-6). Without bias correction the first steps are small
    (``m`` starts at 0), which the warmup of the original schedule also assumes.
    """

    def __init__(self, params, lr: float = 1e-4, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.0):
        _check_hyperparameters(lr, betas, eps, weight_decay)
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay})

    def _update(self, param: torch.Tensor, group: dict, state: dict) -> None:
        param.add_(_adam_direction(param, group, state, bias_correction=False), alpha=-group["lr"])


class Lamb(_AdamFamily):
    """LAMB: layer-wise adaptive moments for large batches (You et al., 2019; NVIDIA's BERT recipe).

    Per step, for each parameter tensor ``w``::

        m, v       = Adam moments of g (bias-corrected when ``bias_correction``)
        u          = m / (sqrt(v) + eps) + weight_decay * w
        trust      = ||w|| / ||u||   (1 when either norm is 0)
        w          = w - lr * trust * u

    ``trust`` is used only in groups with ``weight_decay > 0`` unless ``adapt_all=True`` (NVIDIA's default
    leaves LayerNorm parameters and biases as plain Adam).
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.0, bias_correction: bool = True, adapt_all: bool = False):
        _check_hyperparameters(lr, betas, eps, weight_decay)
        defaults = {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                    "bias_correction": bias_correction, "adapt_all": adapt_all}
        super().__init__(params, defaults)

    def _update(self, param: torch.Tensor, group: dict, state: dict) -> None:
        update = _adam_direction(param, group, state, bias_correction=group["bias_correction"])
        trust = 1.0
        if group["weight_decay"] != 0.0 or group["adapt_all"]:
            weight_norm, update_norm = param.norm().item(), update.norm().item()
            if weight_norm > 0.0 and update_norm > 0.0:
                trust = weight_norm / update_norm
        param.add_(update, alpha=-group["lr"] * trust)


def create_optimizer(
    model: nn.Module,
    name: str = "adamw",
    *,
    lr: float = 1e-4,
    weight_decay: float = 0.01,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-6,
) -> torch.optim.Optimizer:
    """``adamw`` (``torch.optim.AdamW``, bias-corrected), ``adam_google`` (:class:`AdamGoogle`) or ``lamb``
    (:class:`Lamb`), over :func:`param_groups` (no decay on LayerNorm and biases)."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; expected one of {OPTIMIZERS}")
    _check_hyperparameters(lr, betas, eps, weight_decay)
    groups = param_groups(model, weight_decay)
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)
    if name == "adam_google":
        return AdamGoogle(groups, lr=lr, betas=betas, eps=eps)
    return Lamb(groups, lr=lr, betas=betas, eps=eps)


class LinearWarmupDecay:
    """The multiplier of :func:`linear_warmup_decay` as a picklable object (so the scheduler's ``state_dict``
    round-trips through checkpoints)."""

    def __init__(self, warmup_steps: int, total_steps: int):
        if not isinstance(total_steps, int) or total_steps < 1:
            raise ValueError(f"total_steps must be a positive int, got {total_steps!r}")
        if not isinstance(warmup_steps, int) or not 0 <= warmup_steps <= total_steps:
            raise ValueError(f"warmup_steps must be an int in [0, total_steps={total_steps}], got {warmup_steps!r}")
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return step / self.warmup_steps
        remaining = self.total_steps - self.warmup_steps
        return max(0.0, (self.total_steps - step) / remaining) if remaining > 0 else 0.0


def linear_warmup_decay(optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int) -> LambdaLR:
    """Linear warmup over ``warmup_steps`` (from 0), then linear decay to 0 at ``total_steps``.

    Call ``scheduler.step()`` once per optimizer step. The first optimizer step runs at ``lr * 0`` when there is
    a warmup, as in Google's and transformers' schedules.
    """
    return LambdaLR(optimizer, LinearWarmupDecay(warmup_steps, total_steps))


def warmup_steps_for(total_steps: int, warmup: float | int) -> int:
    """``warmup`` as a step count: an int is taken as is, a float in [0, 1) as a fraction of ``total_steps``."""
    if isinstance(warmup, bool):
        raise TypeError(f"warmup must be a step count or a fraction, got {warmup!r}")
    if isinstance(warmup, int):
        return min(warmup, total_steps)
    if not 0.0 <= warmup < 1.0:
        raise ValueError(f"a warmup fraction must be in [0, 1), got {warmup}")
    return int(math.ceil(warmup * total_steps))
