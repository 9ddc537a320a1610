"""Runs in: the parent. The core the commands stand on: requests and their checks, the runner (plan -> launch ->
collect -> record), a run's analysis, and each command's domain (comparison, tuning, sweep, comm_bench, slurm_script,
noise_floor). It stands on harness/ground/, harness/launching/ and harness/model/; the reports stand on it."""
