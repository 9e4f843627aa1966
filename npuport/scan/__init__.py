"""Static CUDA-API source scan (source_scan, cuda_refs, source_apis) and `npuport migrate` (migrate), both over the AST,
never executing the user's code."""
