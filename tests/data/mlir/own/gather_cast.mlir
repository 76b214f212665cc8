// Written for aoc's tests: tosa.gather, and tosa.cast float -> int (round half to even).
func.func @main(%v: tensor<2x5x3xf32>, %i: tensor<2x4xi32>) -> (tensor<2x4x3xf32>, tensor<2x4x3xi32>) {
  %g = tosa.gather %v, %i : (tensor<2x5x3xf32>, tensor<2x4xi32>) -> tensor<2x4x3xf32>
  %c = tosa.cast %g : (tensor<2x4x3xf32>) -> tensor<2x4x3xi32>
  return %g, %c : tensor<2x4x3xf32>, tensor<2x4x3xi32>
}
