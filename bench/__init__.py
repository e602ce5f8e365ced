# SPDX-License-Identifier: Apache-2.0
"""FlashIndexer's product benchmark: `python -m bench <routine>` (bench/README.md)."""
