"""FlashIndexer's product benchmark: `python -m bench <routine>` (bench/README.md)."""
