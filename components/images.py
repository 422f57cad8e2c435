"""The stage images every KFP component defaults to (built from ``images/``; ``make image-cpu``).

One place for the names, without importing kfp, so the command line can show
them as option defaults cheaply. A pipeline swaps them per run (``CurriculumShape``).
"""

CPU_IMAGE = "localhost/termrl/stage-cpu:latest"
GPU_IMAGE = "localhost/termrl/stage-gpu:latest"
