"""Reading Kineto / Chrome traces written by `torch.profiler` into columnar numpy arrays, one concern a module.

- `rank_trace`: what a loaded trace is (`RankTrace`, `MemoryEvents`, `CollectiveRecord`) and `TraceError`.
- `formats`: which files are traces, how their text is opened and streamed, the metadata ahead of the events.
- `events`: the typed event every decoder produces (only the fields the analyses read).
- `backends`: the decoders as named choices (`DecodeBackend`): msgspec in blocks, ijson streaming, stdlib json.
- `msgspec_chunks`, `ijson_stream`: the block decoder and the streaming fallback behind them.
- `columns`, `narrowing`: decoded events appended to typed columns, integers held as narrow as their values.
- `parallel`: our indexed multi-member traces read by one process per core (through `analysis/worker_pool.py`).
- `heap`: giving freed heap pages back to the system after a merge.
- `progress`: the hook through which every file loaded reports its bytes read.
- `load`: one file or a folder of rank traces, end to end; `analysis/trace_loader.py` re-exports it.
"""
