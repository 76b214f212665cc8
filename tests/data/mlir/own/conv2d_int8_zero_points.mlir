// Written for aoc's tests: integer tosa.conv2d with non-zero zero points (stride 2, padded), then tosa.rescale to i8.
func.func @main(%x: tensor<1x5x5x3xi8>, %w: tensor<4x3x3x3xi8>, %b: tensor<4xi32>) -> (tensor<1x3x3x4xi32>, tensor<1x3x3x4xi8>) {
  %izp = "tosa.const"() <{values = dense<-3> : tensor<1xi8>}> : () -> tensor<1xi8>
  %wzp = "tosa.const"() <{values = dense<2> : tensor<1xi8>}> : () -> tensor<1xi8>
  %y = tosa.conv2d %x, %w, %b, %izp, %wzp {acc_type = i32, dilation = array<i64: 1, 1>, pad = array<i64: 1, 1, 1, 1>, stride = array<i64: 2, 2>} : (tensor<1x5x5x3xi8>, tensor<4x3x3x3xi8>, tensor<4xi32>, tensor<1xi8>, tensor<1xi8>) -> tensor<1x3x3x4xi32>
  %mult = "tosa.const"() <{values = dense<[1073741824, 1342177280, 805306368, 1610612736]> : tensor<4xi32>}> : () -> tensor<4xi32>
  %shift = "tosa.const"() <{values = dense<[38, 38, 37, 39]> : tensor<4xi8>}> : () -> tensor<4xi8>
  %rzp = "tosa.const"() <{values = dense<0> : tensor<1xi32>}> : () -> tensor<1xi32>
  %ozp = "tosa.const"() <{values = dense<-5> : tensor<1xi8>}> : () -> tensor<1xi8>
  %q = tosa.rescale %y, %mult, %shift, %rzp, %ozp {rounding_mode = SINGLE_ROUND, scale32 = true, per_channel = true, input_unsigned = false, output_unsigned = false} : (tensor<1x3x3x4xi32>, tensor<4xi32>, tensor<4xi8>, tensor<1xi32>, tensor<1xi8>) -> tensor<1x3x3x4xi8>
  return %y, %q : tensor<1x3x3x4xi32>, tensor<1x3x3x4xi8>
}
