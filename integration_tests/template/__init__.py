"""What every sink shares through the two-phase-commit template: batch writes, no option
silently ignored, the transaction log on S3."""
