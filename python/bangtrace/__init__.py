"""bangtrace: record another engine's run into a bangtrace trace.

    import bangtrace.torch
    with bangtrace.torch.record(model, "run.db", model_path="qwen3-folder"):
        model.generate(ids, max_new_tokens=32, do_sample=False)

then `bangtrace bisect run.db`, `bangtrace bisect --reference run.db`,
`bangtrace browse run.db`. The library is libbangtrace (BANGTRACE_LIB names
it); doc/pytorch.md says what is recorded and what it costs."""
from ._lib import BangtraceError, Model, Recording, stats, lib  # noqa: F401

__all__ = ["BangtraceError", "Model", "Recording", "stats", "lib"]
