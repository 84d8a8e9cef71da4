"""The names :func:`hfbert.optim.create_optimizer` accepts, in a module without torch: ``hfbert pretrain`` checks its
``--optimizer`` setting against them before any training library is loaded (:mod:`hfbert.optim` re-exports them)."""

__all__ = ["OPTIMIZERS"]

#: Names accepted by :func:`hfbert.optim.create_optimizer`.
OPTIMIZERS: tuple[str, ...] = ("adamw", "adam_google", "lamb")
