"""graphnn.frontend: eager tensors, autograd, creation functions and (later) Modules."""
