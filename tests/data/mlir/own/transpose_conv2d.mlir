// Written for aoc's tests: tosa.transpose_conv2d, stride 2, the top and left rows cropped.
func.func @main(%x: tensor<1x4x4x2xf32>, %w: tensor<3x3x3x2xf32>, %b: tensor<3xf32>) -> tensor<1x8x8x3xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %y = tosa.transpose_conv2d %x, %w, %b, %zp, %zp {acc_type = f32, out_pad = array<i64: -1, 0, -1, 0>, stride = array<i64: 2, 2>} : (tensor<1x4x4x2xf32>, tensor<3x3x3x2xf32>, tensor<3xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x8x8x3xf32>
  return %y : tensor<1x8x8x3xf32>
}
