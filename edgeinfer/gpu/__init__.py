"""GPU offload through OpenCL: the placement plan (placement.py). The device runtime, kernels and
program cache are in the core (native/src/gpu/); device listing is ``edgeinfer devices``."""
