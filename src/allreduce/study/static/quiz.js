/* The study guide's self-check quizzes (allreduce.study): the reader answers in the page,
   the page says right or wrong.  Nothing is loaded from the network.  Each quiz is a
   <form class="quiz-form" data-kind="number|choice" data-answer="..." [data-tolerance]>
   inside a .quiz box whose .quiz-explanation is shown once the reader is right or asks. */
(function () {
  "use strict";

  // "1,400", "1 400", "85.9", "8.6e1", "2/3" -> a number; anything else -> NaN
  function parseNumber(text) {
    var s = String(text).trim().replace(/[\s\u202f\u00a0]/g, "").replace(/,(?=\d{3}(\D|$))/g, "");
    s = s.replace(/\u2212/g, "-").replace(",", ".");
    var fraction = s.match(/^(-?[\d.]+)\/([\d.]+)$/);
    if (fraction) return parseFloat(fraction[1]) / parseFloat(fraction[2]);
    return /^-?(\d+\.?\d*|\.\d+)(e-?\d+)?$/i.test(s) ? parseFloat(s) : NaN;
  }

  function isRight(form) {
    var answer = form.dataset.answer;
    if (form.dataset.kind === "choice") {
      var picked = form.querySelector("input[type=radio]:checked");
      return picked ? picked.value === answer : null;
    }
    var value = parseNumber(form.querySelector("input[name=answer]").value);
    if (isNaN(value)) return null;
    var expected = parseFloat(answer);
    var tolerance = parseFloat(form.dataset.tolerance || "0");
    var allowed = Math.max(Math.abs(expected) * tolerance, 1e-9 * Math.max(1, Math.abs(expected)));
    return Math.abs(value - expected) <= allowed;
  }

  function reveal(form) {
    var box = form.closest(".quiz");
    if (box) box.classList.add("quiz-revealed");
  }

  function check(form) {
    var feedback = form.querySelector(".quiz-feedback");
    var right = isRight(form);
    form.classList.remove("quiz-right", "quiz-wrong");
    if (right === null) {
      feedback.textContent = form.dataset.kind === "choice" ? "Pick an answer first."
                                                            : "Enter a number, such as 12 or 0.5.";
      return;
    }
    form.classList.add(right ? "quiz-right" : "quiz-wrong");
    feedback.textContent = right ? "Right!" : "Not quite. Try again, or show the answer.";
    if (right) reveal(form);
    else form.querySelector(".quiz-show").hidden = false;
  }

  function setUp() {
    document.querySelectorAll("form.quiz-form").forEach(function (form) {
      form.addEventListener("submit", function (event) { event.preventDefault(); check(form); });
      form.querySelector(".quiz-show").addEventListener("click", function () { reveal(form); });
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", setUp);
  else setUp();
})();
