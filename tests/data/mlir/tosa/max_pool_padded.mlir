func.func @max_pool_padded(%arg0: tensor<1x6x34x62xf32>) -> tensor<1x4x33x62xf32> {
  %0 = tosa.max_pool2d %arg0 {pad = array<i64: 0, 0, 0, 1>, kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>} : (tensor<1x6x34x62xf32>) -> tensor<1x4x33x62xf32>
  return %0 : tensor<1x4x33x62xf32>
}
