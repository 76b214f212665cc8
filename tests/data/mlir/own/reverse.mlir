// Written for aoc's tests: tosa.reverse along the middle axis.
func.func @main(%x: tensor<3x5x2xf32>) -> tensor<3x5x2xf32> {
  %y = tosa.reverse %x {axis = 1 : i32} : (tensor<3x5x2xf32>) -> tensor<3x5x2xf32>
  return %y : tensor<3x5x2xf32>
}
