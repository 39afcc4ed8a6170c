pub const POOL_SIZE: usize = 40;
