"""Measurement, apart from the product: the benchmarks `invoke bench.*` runs (`labs`, `coldup`, `colocate`,
`projection`), the result files under bench/ with their provenance (`record`) and docs/benchmarks.md made from them
(`docs`). The top of the host side: no other hostlab module imports it."""
