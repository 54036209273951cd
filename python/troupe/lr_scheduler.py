"""mx.lr_scheduler: the learning rate as a function of the update count."""
import math


class LRScheduler:
    def __init__(self, base_lr=0.01, warmup_steps=0, warmup_begin_lr=0, warmup_mode="linear"):
        self.base_lr = base_lr
        self.warmup_steps, self.warmup_begin_lr, self.warmup_mode = warmup_steps, warmup_begin_lr, warmup_mode

    def get_warmup_lr(self, num_update):
        if self.warmup_mode == "linear":
            return self.warmup_begin_lr + (self.base_lr - self.warmup_begin_lr) * num_update / self.warmup_steps
        return self.base_lr

    def __call__(self, num_update):
        raise NotImplementedError


class FactorScheduler(LRScheduler):
    """lr * factor every `step` updates, not below stop_factor_lr."""

    def __init__(self, step, factor=1, stop_factor_lr=1e-8, base_lr=0.01, **kwargs):
        super().__init__(base_lr, **kwargs)
        if step < 1:
            raise ValueError("Schedule step must be greater or equal than 1 round")
        self.step, self.factor, self.stop_factor_lr = step, factor, stop_factor_lr

    def __call__(self, num_update):
        if num_update < self.warmup_steps:
            return self.get_warmup_lr(num_update)
        return max(self.base_lr * self.factor ** (num_update // self.step), self.stop_factor_lr)


class MultiFactorScheduler(LRScheduler):
    """lr * factor at each update count in `step` (increasing)."""

    def __init__(self, step, factor=1, base_lr=0.01, **kwargs):
        super().__init__(base_lr, **kwargs)
        if any(b <= a for a, b in zip(step, step[1:])):
            raise ValueError("Schedule step must be an increasing integer list")
        self.step, self.factor = list(step), factor

    def __call__(self, num_update):
        if num_update < self.warmup_steps:
            return self.get_warmup_lr(num_update)
        return self.base_lr * self.factor ** sum(1 for s in self.step if num_update > s)


class PolyScheduler(LRScheduler):
    def __init__(self, max_update, base_lr=0.01, pwr=2, final_lr=0, **kwargs):
        super().__init__(base_lr, **kwargs)
        self.max_update, self.power, self.final_lr = max_update, pwr, final_lr

    def __call__(self, num_update):
        if num_update < self.warmup_steps:
            return self.get_warmup_lr(num_update)
        if num_update >= self.max_update:
            return self.final_lr
        frac = 1 - (num_update - self.warmup_steps) / (self.max_update - self.warmup_steps)
        return self.final_lr + (self.base_lr - self.final_lr) * frac ** self.power


class CosineScheduler(LRScheduler):
    def __init__(self, max_update, base_lr=0.01, final_lr=0, **kwargs):
        super().__init__(base_lr, **kwargs)
        self.max_update, self.final_lr = max_update, final_lr

    def __call__(self, num_update):
        if num_update < self.warmup_steps:
            return self.get_warmup_lr(num_update)
        if num_update >= self.max_update:
            return self.final_lr
        t = (num_update - self.warmup_steps) / (self.max_update - self.warmup_steps)
        return self.final_lr + (self.base_lr - self.final_lr) * (1 + math.cos(math.pi * t)) / 2
