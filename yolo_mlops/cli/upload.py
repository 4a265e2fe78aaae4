"""`yolo-mlops upload RUN_FOLDER`: send a run the tracking store missed (server gone, store not writable).

The run folder records its tracking URI, experiment and run id (tracking.json) and everything the store
should hold (run_record.json, artifacts, tables); see yolo_mlops/tracking/upload.py. Running it twice sends
nothing twice.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def cmd_upload(args: argparse.Namespace) -> int:
    from yolo_mlops.tracking import upload

    result = upload.upload(args.folder)
    for warning in result.warnings:  # what the folder lacks or holds unreadable: sent without it, or as it is
        print(f"yolo-mlops: warning: {args.folder}: {warning}", file=sys.stderr)
    if result.already:
        print(f"{args.folder}: already uploaded to MLflow run {result.run_id} ({result.status}); nothing to send")
    else:
        created = " (created: the run did not exist in the store)" if result.created else ""
        print(f"{args.folder}: uploaded to MLflow run {result.run_id}{created}, ended {result.status}")
    return 0


def register(sub) -> None:
    upload = sub.add_parser("upload", help="send a run folder the tracking store missed to its MLflow run")
    upload.add_argument("folder", type=Path, help="the run folder (<data home>/runs/<timestamp>-<id>)")
    upload.set_defaults(handler=cmd_upload)
