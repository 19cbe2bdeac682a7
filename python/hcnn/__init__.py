"""hcnn: the Python package over libhcnn's C API (placeholder; the package's modules come with the API)."""
