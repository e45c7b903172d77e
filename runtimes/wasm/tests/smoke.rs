use std::sync::Arc;
use codeact_runtime::{Limits, NoTools, Runtime};
use codeact_wasm::WasmRuntime;

#[test]
fn smoke() {
    for name in ["wasm:micropython", "wasm:js", "wasm:python"] {
        let t = std::time::Instant::now();
        let runtime = WasmRuntime::by_name(name, Limits::default()).expect("load");
        eprintln!("{name}: loaded in {:?} from {:?}", t.elapsed(), runtime.source());
        let t = std::time::Instant::now();
        let mut session = runtime.new_session(Arc::new(NoTools)).expect("session");
        eprintln!("{name}: session in {:?}", t.elapsed());
        let scripts: &[&str] = if name == "wasm:js" {
            &["var x = 20; console.log('hi', {a:1}); 1", "final_result(x + 22)", "let y = ;", "while(true){}", "final_result(typeof x)"]
        } else {
            &["x = 20\nprint('hi', x)", "final_result(x + 22)", "x = ", "while True: pass", "final_result(str(globals().get('x')))"]
        };
        for s in scripts {
            let t = std::time::Instant::now();
            let out = session.run(s).expect("run");
            eprintln!("{name}: {s:?} -> {:?} logs={:?} in {:?}", out.completion, out.logs.render(), t.elapsed());
        }
    }
}
