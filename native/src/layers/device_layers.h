// Layers that run on another backend than the CPU (an OpenCL device, gpu/offload.h), as the
// forward pass sees them: it hands over each range of consecutive such layers with the hidden
// state and gets the state back. The forward knows no more of the device than this.
#pragma once
#include <cstdint>

namespace ei {

class DeviceLayers {
public:
    virtual ~DeviceLayers() = default;
    virtual bool on_device(int layer) const = 0;
    // The last layer of the run of consecutive device layers that starts at `layer`.
    virtual int range_end(int layer) const = 0;
    // Layers first..last on x [n][n_embd] in place, for tokens at positions pos0 .. pos0 + n - 1;
    // in layer `last`, rows before r0 stop once their K/V are cached (decoder_layer's r0: the
    // model's last layer when only later rows' logits are wanted), and only rows r0.. of x are
    // written back.
    virtual void run(int first, int last, float* x, int64_t n, int64_t pos0, int64_t r0) = 0;
};

}  // namespace ei
