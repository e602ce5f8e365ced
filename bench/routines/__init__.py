# SPDX-License-Identifier: Apache-2.0
"""One module per routine; each run(ctx) measures its cases and returns its tables."""
