"""The `delta-eos` sink: behaviour and modes, table quality, protocol safety, S3, operators'
habits, and its crash matrices (append and upsert)."""
