// Written for aoc's tests: i32 tosa.mul with a rounding shift.
func.func @main(%a: tensor<40xi32>, %b: tensor<40xi32>) -> tensor<40xi32> {
  %shift = "tosa.const"() <{values = dense<5> : tensor<1xi8>}> : () -> tensor<1xi8>
  %y = tosa.mul %a, %b, %shift : (tensor<40xi32>, tensor<40xi32>, tensor<1xi8>) -> tensor<40xi32>
  return %y : tensor<40xi32>
}
