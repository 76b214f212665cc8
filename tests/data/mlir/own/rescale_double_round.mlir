// Written for aoc's tests: per-channel tosa.rescale with DOUBLE_ROUND (shifts above and at 31), i32 -> i16.
func.func @main(%x: tensor<50x3xi32>) -> tensor<50x3xi16> {
  %mult = "tosa.const"() <{values = dense<[1518500250, 1073741824, 2000000000]> : tensor<3xi32>}> : () -> tensor<3xi32>
  %shift = "tosa.const"() <{values = dense<[33, 32, 31]> : tensor<3xi8>}> : () -> tensor<3xi8>
  %izp = "tosa.const"() <{values = dense<0> : tensor<1xi32>}> : () -> tensor<1xi32>
  %ozp = "tosa.const"() <{values = dense<0> : tensor<1xi16>}> : () -> tensor<1xi16>
  %y = tosa.rescale %x, %mult, %shift, %izp, %ozp {rounding_mode = DOUBLE_ROUND, scale32 = true, per_channel = true, input_unsigned = false, output_unsigned = false} : (tensor<50x3xi32>, tensor<3xi32>, tensor<3xi8>, tensor<1xi32>, tensor<1xi16>) -> tensor<50x3xi16>
  return %y : tensor<50x3xi16>
}
