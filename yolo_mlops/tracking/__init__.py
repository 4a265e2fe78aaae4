"""MLflow tracking, the only package that calls the MLflow client:

    connection     the tracking URI, the client, whether the store can be used and the server still answers
    writes         experiments, runs, batched params/metrics/tags, artifact uploads
    run_end        how a run ends (FINISHED, FAILED, KILLED) and the reason that travels with its exception
    queries        run lookups as typed records, sweep children, paginated searches, artifacts read back, UI links
    history_cache  finished runs (an experiment's, or one series') kept on disk between reads and refreshed
                   from MLflow, so a year of nightly history reads in the time of a night's runs
    upload         a run folder as the record of its run, and `yolo-mlops upload` to send it later

The names it writes (tags, params, metrics, artifact paths) are `yolo_mlops.names`, the contracts layer's leaf.
Importing the package does not import MLflow; `connection` and `run_end` import it only inside the functions that
call it.
"""
