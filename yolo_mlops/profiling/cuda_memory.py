"""CUDA memory snapshot over the profiled steps: allocator history for PyTorch's memory visualiser.

`CudaMemorySnapshot` follows the profiler window: `follow(recording)` after every `prof.step()` starts recording
the allocator's history when the window opens and, when it closes, writes the snapshot (a pickle that
https://pytorch.org/memory_viz opens locally, in the browser, without uploading it) and stops recording. One
snapshot per run: the first window. torch's calls for it are private; `compat.torch` makes them.

On a run without CUDA (or a torch without the private API) it does nothing and says why in `status`,
which the pipeline records as a tag. Costs: recording keeps a stack per live allocation (bounded by
`max_entries`), only inside the profiled window.
"""

from __future__ import annotations

from pathlib import Path

from yolo_mlops import names
from yolo_mlops.compat import torch as torch_compat

SNAPSHOT_FILE = names.file_name(names.CUDA_MEMORY_SNAPSHOT_PICKLE)
MAX_ENTRIES = 100_000
RECORDED = "recorded"


class CudaMemorySnapshot:
    def __init__(self, out_dir: Path, device: str, max_entries: int = MAX_ENTRIES) -> None:
        self.path = Path(out_dir) / SNAPSHOT_FILE
        self.max_entries = max_entries
        self._recording = False
        self._done = False
        self.status = self._why_not(device)  # None: possible, not yet taken

    @staticmethod
    def _why_not(device: str) -> str | None:
        if device == "cpu":
            return "skipped: training on CPU (a CUDA allocator snapshot needs a GPU)"
        import torch

        if not torch.cuda.is_available():
            return "skipped: CUDA not available"
        missing = torch_compat.memory_history_missing()
        return None if missing is None else f"skipped: {missing}"

    def follow(self, recording: bool) -> None:
        """Call after each profiler step with whether the profiler now records."""
        if self.status is not None and not self._recording:
            return
        if recording and not self._recording and not self._done:
            self._start()
        elif not recording and self._recording:
            self.close()

    def _start(self) -> None:
        try:
            torch_compat.start_memory_history(self.max_entries)
        except Exception as exc:  # a snapshot is a diagnostic: it never stops training
            self.status = f"skipped: recording failed ({type(exc).__name__}: {exc})"
            return
        self._recording = True

    def close(self) -> None:
        """Dump and stop (idempotent; also called when training ends inside the window)."""
        if not self._recording:
            return
        self._recording, self._done = False, True
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            torch_compat.dump_memory_snapshot(self.path)
            self.status = RECORDED
        except Exception as exc:
            self.status = f"skipped: dump failed ({type(exc).__name__}: {exc})"
        finally:
            try:
                torch_compat.stop_memory_history()
            except Exception:  # a diagnostic never stops training; the status already says what happened
                pass
