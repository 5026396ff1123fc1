module {
  func.func @forward(%x: tensor<?x?x8xf32>) -> tensor<?x?x16xf32> {
    %w = mt.param "w" normal(2.0e-02) : tensor<16x4xf32>
    %y = mt.linear %x, %w : (tensor<?x?x8xf32>, tensor<16x4xf32>) -> tensor<?x?x16xf32>
    return %y : tensor<?x?x16xf32>
  }
}
