"""Runs in: the parent. Starting one launch's processes, watching them, stopping them and saying what ended them:
launch (the supervisor of one launch), rank_env (what its commands run with), launch_logs and culprit
(reading what it left), reaper (stopping it), hosts and nodeguard (other hosts), interrupt and machine."""
