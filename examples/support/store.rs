//! The store an example runs on: Redis when `REDIS_URL` names one (the example's keys under a
//! prefix of its own), else this process's memory.

/// Runs `$run(store)` on Redis at `REDIS_URL`, with `$prefix` before every key, or on a
/// `MemoryStore` when `REDIS_URL` is not set.
macro_rules! run_on_the_store {
    ($prefix:literal, $run:ident) => {
        match std::env::var("REDIS_URL") {
            Ok(url) => {
                println!("store: Redis at {url}");
                let store = redefer::RedisStore::builder()
                    .prefix($prefix)?
                    .connect(&url)
                    .await?;
                $run(store).await
            }
            Err(_) => {
                println!("store: in-process memory (set REDIS_URL to use Redis)");
                $run(redefer::MemoryStore::new()).await
            }
        }
    };
}
