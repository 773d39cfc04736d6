// The exception family every part of the core throws. The bindings map each class to a Python
// exception of the same meaning (edgeinfer.errors), so callers catch one family.
#pragma once
#include <stdexcept>
#include <string>

namespace ei {

// Base of everything the core throws on purpose -> edgeinfer.EdgeInferError.
struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A model file that is malformed, truncated or unsupported -> edgeinfer.ModelFormatError.
struct FormatError : Error {
    using Error::Error;
};

// More tokens than the context holds -> edgeinfer.ContextOverflowError.
struct ContextOverflowError : Error {
    using Error::Error;
};

// A saved state (or KV snapshot) that is corrupt, truncated, from another model or for another
// KV layout -> edgeinfer.StateFileError. Nothing was changed when it is thrown.
struct StateError : Error {
    using Error::Error;
};

}  // namespace ei
