fn main() {
    // TODO: remove the debug endpoint before the release
    println!("shop-api");
}
