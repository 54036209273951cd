// Placeholder: this operator's implementation lands with the rest of the op library (issue 4).
