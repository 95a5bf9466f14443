// fuzz/make_seeds.cpp — seed inputs for the harnesses, cut from the real files in ../shared:
//   fuzz_make_seeds SHARED_DIR OUT_DIR   writes OUT_DIR/<harness>/<name>
// The real vocabularies are megabytes; a fuzzer mutates small inputs much faster, so each seed
// keeps a real file's structure (every key, the real split patterns, special tokens, the byte
// tokens) with a few hundred of its tokens and the merges among them. A plain program (no
// sanitizers): scripts/fuzz runs it before fuzzing.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;
using ojson = nlohmann::json;  // (ordered_json is quadratic on 150k-key vocabularies)

namespace {

std::string shared, out;
int written = 0;

std::string read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
void write(const std::string& harness, const std::string& name, const std::string& bytes) {
    fs::create_directories(out + "/" + harness);
    std::ofstream(out + "/" + harness + "/" + name, std::ios::binary) << bytes;
    ++written;
}
template <typename T>
void put(std::string& s, T v) { s.append(reinterpret_cast<const char*>(&v), sizeof v); }

// GPT-2's printable stand-ins for the 256 bytes (byte_level.hpp), as UTF-8 strings.
std::set<std::string> printable_bytes() {
    std::set<std::string> out;
    auto utf8 = [](unsigned cp) {
        std::string s;
        if (cp < 0x80) s += static_cast<char>(cp);
        else { s += static_cast<char>(0xC0 | (cp >> 6)); s += static_cast<char>(0x80 | (cp & 0x3F)); }
        return s;
    };
    int n = 0;
    for (unsigned b = 0; b < 256; ++b) {
        const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        out.insert(utf8(printable ? b : 256 + n++));
    }
    return out;
}

bool is_byte_piece(const std::string& t) { return t.size() == 6 && t.rfind("<0x", 0) == 0 && t[5] == '>'; }

// ---- llama2.c checkpoint: the real stories260K header shrunk, its first weights -------------

void checkpoints() {
    const std::string real = read(shared + "/models/stories260K.bin");
    const float* w = reinterpret_cast<const float*>(real.data() + 28);
    struct Shape { int dim, hidden, layers, heads, kv_heads, vocab, seq; };
    const Shape shapes[] = {{8, 12, 1, 2, 1, 16, 4}, {16, 24, 2, 4, 2, -8, 8}, {4, 4, 1, 1, 1, 3, 2}};
    int i = 0;
    for (const Shape& s : shapes) {
        const std::int64_t d = s.dim, h = s.hidden, L = s.layers, kv = s.kv_heads * (s.dim / s.heads),
                           v = s.vocab < 0 ? -s.vocab : s.vocab;
        std::int64_t n = v * d + L * (2 * d + 2 * d * d + 2 * kv * d + 3 * h * d) + d + s.seq * (d / s.heads);
        if (s.vocab < 0) n += v * d;
        std::string file;
        for (int x : {s.dim, s.hidden, s.layers, s.heads, s.kv_heads, s.vocab, s.seq}) put<std::int32_t>(file, x);
        file.append(reinterpret_cast<const char*>(w), static_cast<size_t>(n) * 4);
        write("fuzz_checkpoint", "stories260K_shrunk_" + std::to_string(i), file);
        // fuzz_fast: options byte, the header, 4 id bytes, weights as int8/64 (the harness's form)
        for (std::uint8_t opt : {std::uint8_t{0}, std::uint8_t{1 | 4}, std::uint8_t{2 | 8}, std::uint8_t{3 | 32}}) {
            std::string f(1, static_cast<char>(opt));
            f += file.substr(0, 28);
            f += std::string("\x01\x02\x03\x01", 4);
            for (std::int64_t k = 0; k < std::min<std::int64_t>(n, 512); ++k)
                f += static_cast<char>(static_cast<std::int8_t>(std::max(-127.0f, std::min(127.0f, w[k] * 64.0f))));
            write("fuzz_fast", "stories260K_shrunk_" + std::to_string(i) + "_opt" + std::to_string(opt), f);
        }
        ++i;
    }
    write("fuzz_checkpoint", "stories260K_header_only", real.substr(0, 28));
}

// ---- llama2.c tokenizer.bin: tok512 whole, the first pieces of Llama 2's ---------------------

void llama2c_tokenizers() {
    write("fuzz_llama2c_tokenizer", "tok512.bin", read(shared + "/models/tok512.bin"));
    const std::string big = read(shared + "/models/tokenizer.bin");
    size_t at = 4;
    for (int i = 0; i < 400 && at + 8 <= big.size(); ++i) {
        std::int32_t len;
        std::memcpy(&len, big.data() + at + 4, 4);
        at += 8 + static_cast<size_t>(len);
    }
    write("fuzz_llama2c_tokenizer", "tokenizer.bin_first400", big.substr(0, at));
}

// ---- .tiktoken: the first lines of each ------------------------------------------------------

void tiktoken() {
    for (const char* name : {"r50k_base", "cl100k_base", "o200k_base"}) {
        const std::string all = read(shared + "/tokenizers/tiktoken/" + name + ".tiktoken");
        size_t at = 0;
        for (int i = 0; i < 500 && at != std::string::npos; ++i) at = all.find('\n', at + 1);
        write("fuzz_tiktoken", std::string(name) + "_first500", all.substr(0, at == std::string::npos ? all.size() : at + 1));
    }
}

// ---- GPT-2 encoder.json + vocab.bpe: ids below 600 and the merges that make them -------------

void gpt2() {
    const ojson enc = ojson::parse(read(shared + "/tokenizers/gpt2/encoder.json"));
    ojson small = ojson::object();
    std::set<std::string> kept;
    for (const auto& [text, id] : enc.items())
        if (id.get<int>() < 600) { small[text] = id; kept.insert(text); }
    small["<|endoftext|>"] = 600;
    std::string merges = "#version: 0.2\n";
    const std::string bpe = read(shared + "/tokenizers/gpt2/vocab.bpe");
    size_t at = bpe.find('\n') + 1;
    while (at < bpe.size()) {
        size_t end = bpe.find('\n', at);
        if (end == std::string::npos) end = bpe.size();
        const std::string line = bpe.substr(at, end - at);
        at = end + 1;
        const size_t sp = line.find(' ');
        if (sp == std::string::npos) continue;
        const std::string l = line.substr(0, sp), r = line.substr(sp + 1);
        if (kept.count(l) && kept.count(r) && kept.count(l + r)) merges += line + "\n";
    }
    write("fuzz_gpt2", "gpt2_first600", small.dump() + "\n=== vocab.bpe ===\n" + merges);  // fuzz_gpt2.cpp's separator
}

// ---- tokenizer.json: the real structure, 600 tokens + every byte token, their merges ---------

ojson shrink_hf(const ojson& j, bool byte_level) {
    const std::set<std::string> bytes = printable_bytes();
    ojson out = j;
    const ojson& vocab = j["model"]["vocab"];
    std::vector<std::pair<int, std::string>> chosen;
    for (const auto& [text, id] : vocab.items())
        if (id.get<int>() < 600 || (byte_level ? bytes.count(text) > 0 : is_byte_piece(text))) chosen.push_back({id.get<int>(), text});
    std::sort(chosen.begin(), chosen.end());
    ojson small = ojson::object();
    std::set<std::string> kept;
    for (size_t i = 0; i < chosen.size(); ++i) { small[chosen[i].second] = static_cast<int>(i); kept.insert(chosen[i].second); }
    ojson merges = ojson::array();
    for (const ojson& m : j["model"]["merges"]) {
        std::string l, r;
        if (m.is_string()) { const std::string s = m.get<std::string>(); l = s.substr(0, s.find(' ')); r = s.substr(s.find(' ') + 1); }
        else { l = m[0].get<std::string>(); r = m[1].get<std::string>(); }
        if (kept.count(l) && kept.count(r) && kept.count(l + r)) merges.push_back(m);
        if (merges.size() >= 400) break;
    }
    ojson added = ojson::array();
    int next = static_cast<int>(chosen.size());
    for (const ojson& a : j["added_tokens"]) {
        if (added.size() >= 5) break;
        ojson b = a;
        b["id"] = next;
        small[a["content"].get<std::string>()] = next++;
        added.push_back(b);
    }
    out["model"]["vocab"] = small;
    out["model"]["merges"] = merges;
    out["added_tokens"] = added;
    return out;
}

// A SentencePiece-style tokenizer.json (Metaspace, byte fallback) made from tok512.bin's pieces.
ojson spm_from_tok512() {
    const std::string bin = read(shared + "/models/tok512.bin");
    std::vector<std::string> pieces;
    std::vector<float> scores;
    for (size_t at = 4; at + 8 <= bin.size();) {
        float score;
        std::int32_t len;
        std::memcpy(&score, bin.data() + at, 4);
        std::memcpy(&len, bin.data() + at + 4, 4);
        std::string p = bin.substr(at + 8, static_cast<size_t>(len));
        std::string q;
        for (char c : p) q += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
        pieces.push_back(q);
        scores.push_back(score);
        at += 8 + static_cast<size_t>(len);
    }
    ojson vocab = ojson::object();
    std::map<std::string, int> id_of;
    for (size_t i = 0; i < pieces.size(); ++i) if (!id_of.count(pieces[i])) { vocab[pieces[i]] = static_cast<int>(i); id_of[pieces[i]] = static_cast<int>(i); }
    std::vector<std::pair<float, std::string>> merges;
    for (size_t i = 3; i < pieces.size(); ++i)
        for (size_t cut = 1; cut < pieces[i].size(); ++cut)
            if (id_of.count(pieces[i].substr(0, cut)) && id_of.count(pieces[i].substr(cut)))
                merges.push_back({-scores[i], pieces[i].substr(0, cut) + " " + pieces[i].substr(cut)});
    std::stable_sort(merges.begin(), merges.end(), [](auto& a, auto& b) { return a.first < b.first; });
    ojson m = ojson::array();
    for (auto& [s, text] : merges) m.push_back(text);
    return ojson{{"version", "1.0"},
                 {"added_tokens", ojson::array({ojson{{"id", 0}, {"content", "<unk>"}, {"special", true}}})},
                 {"normalizer", ojson{{"type", "Sequence"}, {"normalizers", ojson::array({
                      ojson{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                      ojson{{"type", "Replace"}, {"pattern", ojson{{"String", " "}}}, {"content", "\xE2\x96\x81"}}})}}},
                 {"pre_tokenizer", nullptr},
                 {"model", ojson{{"type", "BPE"}, {"unk_token", "<unk>"}, {"byte_fallback", true}, {"vocab", vocab}, {"merges", m}}}};
}

void hf() {
    for (const char* name : {"gpt2", "llama3", "qwen3"}) {
        const ojson j = ojson::parse(read(shared + "/tokenizers/hf/" + name + "/tokenizer.json"));
        write("fuzz_hf_tokenizer", std::string(name) + "_shrunk.json", shrink_hf(j, true).dump(1));
    }
    write("fuzz_hf_tokenizer", "tok512_as_sentencepiece.json", spm_from_tok512().dump(1));
}

// ---- GGUF: every metadata key kept, the token arrays cut to 600 + the byte tokens ------------

struct Value {
    std::uint32_t type = 0;
    std::string scalar;        // raw bytes of a number or bool
    std::string text;          // type 8
    std::uint32_t elem = 0;    // type 9
    std::vector<Value> items;  // type 9
};

struct Reader {
    const std::string& b;
    size_t at = 0;
    template <typename T>
    T get() {
        if (at + sizeof(T) > b.size()) throw std::runtime_error("GGUF ends early");
        T v;
        std::memcpy(&v, b.data() + at, sizeof v);
        at += sizeof v;
        return v;
    }
    std::string str() {
        const auto n = get<std::uint64_t>();
        if (n > b.size() - at) throw std::runtime_error("GGUF string too long");
        std::string s = b.substr(at, n);
        at += n;
        return s;
    }
    Value value(std::uint32_t type) {
        static const int sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
        Value v;
        v.type = type;
        if (type == 8) v.text = str();
        else if (type == 9) {
            v.elem = get<std::uint32_t>();
            const auto n = get<std::uint64_t>();
            for (std::uint64_t i = 0; i < n; ++i) v.items.push_back(value(v.elem));
        } else if (type <= 12) {
            v.scalar = b.substr(at, sizes[type]);
            at += sizes[type];
        } else throw std::runtime_error("GGUF type");
        return v;
    }
};

void put_value(std::string& s, const Value& v) {
    if (v.type == 8) { put<std::uint64_t>(s, v.text.size()); s += v.text; }
    else if (v.type == 9) {
        put<std::uint32_t>(s, v.elem);
        put<std::uint64_t>(s, v.items.size());
        for (const Value& x : v.items) put_value(s, x);
    } else s += v.scalar;
}

void gguf() {
    const std::set<std::string> bytes = printable_bytes();
    for (const char* name : {"deepseek-coder", "deepseek-llm", "falcon", "gpt-2", "llama-spm", "mpt", "phi-3", "refact", "starcoder"}) {
        const std::string all = read(shared + "/tokenizers/llamacpp/ggml-vocab-" + name + ".gguf");
        Reader r{all};
        r.get<std::uint32_t>();
        const auto version = r.get<std::uint32_t>();
        r.get<std::uint64_t>();
        const auto n_kv = r.get<std::uint64_t>();
        std::vector<std::pair<std::string, Value>> kvs;
        for (std::uint64_t i = 0; i < n_kv; ++i) {
            std::string key = r.str();
            const auto type = r.get<std::uint32_t>();
            kvs.push_back({key, r.value(type)});
        }
        std::vector<Value>* tokens = nullptr;
        std::string model;
        for (auto& [k, v] : kvs) {
            if (k == "tokenizer.ggml.tokens") tokens = &v.items;
            if (k == "tokenizer.ggml.model") model = v.text;
        }
        if (!tokens) continue;
        std::vector<int> keep;  // old ids, in order
        for (size_t id = 0; id < tokens->size(); ++id) {
            const std::string& t = (*tokens)[id].text;
            if (id < 600 || (model == "gpt2" ? bytes.count(t) > 0 : is_byte_piece(t))) keep.push_back(static_cast<int>(id));
        }
        std::unordered_map<int, int> new_id;
        std::set<std::string> kept;
        for (size_t i = 0; i < keep.size(); ++i) { new_id[keep[i]] = static_cast<int>(i); kept.insert((*tokens)[keep[i]].text); }
        std::string file = "GGUF";
        put<std::uint32_t>(file, version);
        put<std::uint64_t>(file, 0);
        std::vector<std::pair<std::string, Value>> outs;
        for (auto& [k, v] : kvs) {
            Value w = v;
            if (k == "tokenizer.ggml.tokens" || k == "tokenizer.ggml.token_type" || k == "tokenizer.ggml.scores") {
                w.items.clear();
                for (int id : keep) if (static_cast<size_t>(id) < v.items.size()) w.items.push_back(v.items[id]);
            } else if (k == "tokenizer.ggml.merges") {
                w.items.clear();
                for (const Value& m : v.items) {
                    const size_t sp = m.text.find(' ');
                    if (sp == std::string::npos) continue;
                    const std::string a = m.text.substr(0, sp), b = m.text.substr(sp + 1);
                    if (kept.count(a) && kept.count(b) && kept.count(a + b)) w.items.push_back(m);
                    if (w.items.size() >= 400) break;
                }
            } else if (k.size() > 9 && k.compare(k.size() - 9, 9, "_token_id") == 0 && v.type == 4) {
                std::uint32_t id;
                std::memcpy(&id, v.scalar.data(), 4);
                if (!new_id.count(static_cast<int>(id))) continue;  // not kept: leave the key out
                const std::uint32_t n = static_cast<std::uint32_t>(new_id[static_cast<int>(id)]);
                w.scalar.assign(reinterpret_cast<const char*>(&n), 4);
            } else if (v.type == 9 && v.items.size() > 64) {
                w.items.resize(64);
            }
            outs.push_back({k, w});
        }
        put<std::uint64_t>(file, outs.size());
        for (auto& [k, v] : outs) {
            put<std::uint64_t>(file, k.size());
            file += k;
            put<std::uint32_t>(file, v.type);
            put_value(file, v);
        }
        write("fuzz_gguf", std::string(name) + "_shrunk.gguf", file);
    }
}

// ---- real vocabularies: llama.cpp's test strings, each for every vocabulary ------------------

void roundtrip() {
    const std::string sep = "\n__ggml_vocab_test__\n";
    const std::string all = read(shared + "/tokenizers/llamacpp/ggml-vocab-gpt-2.gguf.inp");
    std::vector<std::string> texts;
    for (size_t at = 0; at < all.size();) {
        size_t end = all.find(sep, at);
        if (end == std::string::npos) break;
        texts.push_back(all.substr(at, end - at));
        at = end + sep.size();
    }
    texts.push_back("\xff\xfe invalid \xc3\x28 utf-8 \xed\xa0\x80 \xf4\x90\x80\x80 <|endoftext|><s></s>\xE2\x96\x81x");
    for (int v = 0; v < 18; ++v)  // fuzz_vocab_roundtrip.cpp has 18 vocabularies
        for (size_t i = 0; i < texts.size(); i += 3)
            write("fuzz_vocab_roundtrip", "v" + std::to_string(v) + "_t" + std::to_string(i),
                  std::string(1, static_cast<char>(v)) + texts[(i + static_cast<size_t>(v)) % texts.size()]);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: fuzz_make_seeds SHARED_DIR OUT_DIR\n");
        return 2;
    }
    shared = argv[1];
    out = argv[2];
    try {
        checkpoints();
        llama2c_tokenizers();
        tiktoken();
        gpt2();
        hf();
        gguf();
        roundtrip();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "fuzz_make_seeds: %s\n", e.what());
        return 1;
    }
    std::printf("fuzz_make_seeds: %d seeds from %s in %s\n", written, shared.c_str(), out.c_str());
    return 0;
}
