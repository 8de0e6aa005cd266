"""GPU executor: a random-weight Llama-style GQA model over a real paged KV pool (issue 14).

Runs on a GPU machine with torch, triton and numpy alone (`shape`, `weights`, `kv_pool`,
`attention`, `model`, `reference`); `runner` and `driver` add sim's scheduler and KV manager.
"""
