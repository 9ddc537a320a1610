"""Runs in: the parent. The core the commands stand on: requests and their checks, the runner (plan -> launch ->
collect -> record), each command's domain (comparison, sweep, comm_bench, slurm_script, noise_floor), records
and their schema, the results directory, statistics and provenance."""
