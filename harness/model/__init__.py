"""The performance model, in one package: what a step costs on N workers and whether that is right.

- costmodel.py: the arithmetic (compute, collectives, each schedule kind's pricer, memory) and its inputs: the
  hardware profiles and published scaling results in profiles/;
- calibration.py: the model fitted to what this tool measured (a `compare scale` sweep and its `compare comm`
  sweeps), predicted vs measured, extrapolation to a profile, the published checks;
- render.py: its words and pictures, for a scale report's "The model" section and for `compare predict`.

Runs in: the parent (a rank measures the model's inputs with harness/rank/profile.py, which imports none of it)."""
