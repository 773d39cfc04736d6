"""GPU offload through OpenCL: the devices of this machine (devices.py), the placement plan
(placement.py) and a model file's plan (model_plan.py). The device runtime, kernels and program
cache are in the core (native/src/gpu/)."""
