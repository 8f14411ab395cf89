"""The reliability suite's subprocess scripts are run by its tests, never collected."""

collect_ignore_glob = ["scripts/*"]
