// Written for aoc's tests: tosa.slice, tosa.tile, tosa.transpose, tosa.tanh.
func.func @main(%x: tensor<4x6x5xf32>) -> tensor<2x4x12xf32> {
  %start = tosa.const_shape {values = dense<[1, 2, 0]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %size = tosa.const_shape {values = dense<[2, 3, 4]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %s = tosa.slice %x, %start, %size : (tensor<4x6x5xf32>, !tosa.shape<3>, !tosa.shape<3>) -> tensor<2x3x4xf32>
  %t = tosa.transpose %s {perms = array<i32: 0, 2, 1>} : (tensor<2x3x4xf32>) -> tensor<2x4x3xf32>
  %m = tosa.const_shape {values = dense<[1, 1, 4]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %r = tosa.tile %t, %m : (tensor<2x4x3xf32>, !tosa.shape<3>) -> tensor<2x4x12xf32>
  %y = tosa.tanh %r : (tensor<2x4x12xf32>) -> tensor<2x4x12xf32>
  return %y : tensor<2x4x12xf32>
}
