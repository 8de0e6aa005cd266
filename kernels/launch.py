"""One Triton kernel launch with its arguments bound once, re-issued with a few tensors swapped.

A serving step runs the same attention launch once per layer: only q, the layer's K/V pool views
and out change, and they keep their shapes, strides and dtypes. `BoundLaunch` holds everything
else (grid, scalars, constexprs, workspaces). Its first call goes through the kernel's normal
`kernel[grid](...)` dispatch, which compiles or finds the kernel and returns it; from then on a
call hands the compiled kernel's launcher the pre-bound argument list directly, skipping the
JIT's per-call binding, specialisation and cache lookup (tens of microseconds of host time per
launch).

The direct path is taken only where it cannot launch a different specialisation than the normal
path would: the swapped tensors keep the 16-byte alignment they had at the first call (Triton
specialises pointers on it; every other argument is fixed), and no launch hooks are set (Triton's
hooks are HookChain objects, never None: a chain counts as set only with a hook in it; the direct
path passes None, which the launcher skips as it skips an empty chain). It needs
the object the normal path returns to have the launcher Triton >= 3.3 uses (`run`, `function`,
`packed_metadata`, called as `JITFunction.run` calls it); anything else (the CPU interpreter, an
older Triton) keeps the normal path for every call.
"""

from __future__ import annotations

import inspect
from typing import Any

_ALIGN = 16  # Triton's pointer specialisation: data_ptr % 16 == 0


def _driver() -> Any:
    """Triton's active driver (a function, so the host-time benchmark can stand one in)."""
    from triton.runtime import driver

    return driver.active


def _hook_set(hook: Any) -> bool:
    """A launch hook that does something: not None and, for Triton's HookChain (the default
    since the hooks became chains, never None), one with hooks in it."""
    if hook is None:
        return False
    calls = getattr(hook, "calls", None)
    return calls is None or len(calls) > 0


def _launch_hooks_set() -> bool:
    try:
        from triton import knobs

        rt = knobs.runtime
        return _hook_set(rt.launch_enter_hook) or _hook_set(rt.launch_exit_hook)
    except Exception:  # no knobs (old Triton): say set, so the normal path is kept
        return True


_PARAMS: dict[int, tuple[list[str], dict[str, Any]] | None] = {}


def _kernel_params(kernel: Any) -> tuple[list[str], dict[str, Any]] | None:
    """The kernel's parameter names and defaults (cached per kernel object)."""
    key = id(kernel)
    if key not in _PARAMS:
        names = getattr(kernel, "arg_names", None)
        fn = getattr(kernel, "fn", None)
        if names is None or fn is None:
            _PARAMS[key] = None
        else:
            params = inspect.signature(fn).parameters
            defaults = {
                n: p.default for n, p in params.items() if p.default is not inspect.Parameter.empty
            }
            _PARAMS[key] = (list(names), defaults)
    return _PARAMS[key]


def _full_args(kernel: Any, args: list[Any], kwargs: dict[str, Any]) -> list[Any] | None:
    """Every parameter of the kernel in order (positional, then keywords, then defaults), as
    `JITFunction.run` hands them to the launcher; None if that cannot be told."""
    known = _kernel_params(kernel)
    if known is None:
        return None
    names, defaults = known
    full = list(args)
    for name in names[len(args) :]:
        if name in kwargs:
            full.append(kwargs[name])
        elif name in defaults:
            full.append(defaults[name])
        else:
            return None
    return full


class BoundLaunch:
    """`kernel[grid](*args, **kwargs)` with `args[swap[i]]` replaced by the i-th tensor of each
    call (swap[i] < 0: that tensor is not an argument of this kernel)."""

    __slots__ = (
        "kernel",
        "grid",
        "args",
        "kwargs",
        "swap",
        "_run",
        "_fn",
        "_meta",
        "_full",
        "_stream",
        "_device",
        "_aligned",
        "_tried",
        "_compiled",
        "fast_launches",
        "why_normal",
    )

    def __init__(
        self,
        kernel: Any,
        grid: tuple[int, int, int],
        args: list[Any],
        kwargs: dict[str, Any],
        swap: tuple[int, ...],
    ) -> None:
        self.kernel = kernel
        self.grid = grid
        self.args = args
        self.kwargs = kwargs
        self.swap = swap
        self._run: Any = None  # the compiled kernel's launcher, once the direct path is set up
        self._fn: Any = None
        self._meta: Any = None
        self._full: list[Any] = []
        self._stream: Any = None
        self._device = 0
        self._aligned = False
        self._tried = False
        self._compiled: Any = None
        self.fast_launches = 0  # calls that took the direct path (tests, benchmarks)
        self.why_normal = ""  # why the direct path was not set up (benchmarks, diagnosis)

    def __call__(self, *tensors: Any) -> None:
        run = self._run
        if run is not None:
            full = self._full
            aligned = True
            for pos, t in zip(self.swap, tensors, strict=True):
                if pos >= 0:
                    full[pos] = t
                    if t.data_ptr() % _ALIGN:
                        aligned = False
            if aligned or not self._aligned:
                g = self.grid
                run(
                    g[0], g[1], g[2], self._stream(self._device), self._fn, self._meta,
                    None, None, None, *full,
                )  # fmt: skip
                self.fast_launches += 1
                return
        args = self.args
        for pos, t in zip(self.swap, tensors, strict=True):
            if pos >= 0:
                args[pos] = t
        if not self._tried and self._compiled is not None:
            # Second call: set the direct path up (a one-shot launch never pays for it).
            self._tried = True
            if self._setup():
                self(*tensors)
                return
        compiled = self.kernel[self.grid](*args, **self.kwargs)
        if self._compiled is None and not self._tried:
            self._compiled = compiled
            self._aligned = all(
                t.data_ptr() % _ALIGN == 0
                for pos, t in zip(self.swap, tensors, strict=True)
                if pos >= 0
            )

    def _setup(self) -> bool:
        """The direct path from the normal path's first result (False: none, see the module
        doc). The swapped tensors' alignment at that first call is in self._aligned."""
        compiled, self._compiled = self._compiled, None
        try:
            if compiled is None or _launch_hooks_set():
                self.why_normal = "no compiled kernel" if compiled is None else "launch hooks"
                return False
            full = _full_args(self.kernel, self.args, self.kwargs)
            if full is None:
                self.why_normal = "parameters unknown"
                return False
            run = compiled.run  # loads the module and builds the launcher if not yet done
            fn, meta = compiled.function, compiled.packed_metadata
            if not callable(run) or fn is None:
                self.why_normal = "no launcher"
                return False
            active = _driver()
            self._device = active.get_current_device()
            self._stream = active.get_current_stream
            self._full, self._fn, self._meta = full, fn, meta
            self._run = run
            return True
        except Exception as exc:  # any surprise: keep the normal path
            self.why_normal = f"{type(exc).__name__}: {exc}"[:200]
            self._run = None
            return False
