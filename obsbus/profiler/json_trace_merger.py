"""Composer's ``composer.profiler.json_trace_merger``: ``merge_traces(output_file, *trace_files)``.

The same merge as :func:`obsbus.profiler.merge.merge_traces` (a process row per
rank, clocks aligned), called the way Composer's is: the output first, then the
traces. Traces of one rank share its row, as in the JSON handler's merged trace.
"""

from __future__ import annotations

import os

from obsbus.profiler.merge import merge_traces as _merge

__all__ = ["merge_traces"]


def merge_traces(output_file: str | os.PathLike[str], *trace_files: str | os.PathLike[str]) -> None:
    """Merge ``trace_files`` into ``output_file`` (Composer's argument order).

    Example:
        >>> import json, pathlib, tempfile
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> for rank in (0, 1):
        ...     event = {"ph": "X", "name": "step", "pid": 0, "tid": 0, "ts": 1, "dur": 2}
        ...     doc = {"traceEvents": [event], "otherData": {"rank": rank}}
        ...     _ = (folder / f"rank{rank}.json").write_text(json.dumps(doc))
        >>> merge_traces(folder / "merged.json", folder / "rank0.json", folder / "rank1.json")
        >>> merged = json.loads((folder / "merged.json").read_text())
        >>> sorted({e["pid"] for e in merged["traceEvents"] if e["name"] == "step"})
        [0, 1]
    """
    if not trace_files:
        raise ValueError(
            f"merge_traces({str(output_file)!r}) got no trace files: the output comes first, "
            "then the traces, e.g. merge_traces('merged.json', 'rank0.json', 'rank1.json')."
        )
    _merge(list(trace_files), output_file, combine_same_rank=True)
